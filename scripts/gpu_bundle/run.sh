#!/usr/bin/env bash
# The GPU check, run from the bundle scripts/gpu_bundle.sh makes (docs/guides/gpus.md;
# docs/architecture.md §10). On a machine with an NVIDIA GPU it finds the GPU, the CUDA
# toolkit's cudart and cuBLASLt and NCCL, says which it uses, and runs in priority order:
# every op against the CPU op; the golden fixtures through --device cuda; training on
# the GPU against the CPU's losses; serving against the CPU server; NCCL at world size 1
# and the host-staged path at 2 and 4 ranks; then the benchmarks. Every step has a time
# limit within one deadline for the whole check (6 minutes): a step that runs long is cut
# and reported, never the whole check.
#
#   run.sh [--out DIR] [--source REPO] [--self-test]
#
# --out: where every log and results.json go (default: a new temporary folder).
# --source: the repository's tree (fixtures, configs); default: the bundle's parent folder.
# --self-test: without a GPU, the same binaries on the emulated device
#   (OLMO2_DEVICE_EMULATION), olmo2 train --device cuda at tp 2 under the bundle's own
#   mpirun, and olmo2 generate --device cuda against --device cpu.
# Exit status 0 only when every step ran and passed (on a GPU: no test skipped).
set -u -o pipefail
B=$(cd "$(dirname "$0")" && pwd)
OUT="" SOURCE="" SELF=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --source) SOURCE=$2; shift 2 ;;
    --self-test) SELF=1; shift ;;
    *) echo "usage: run.sh [--out DIR] [--source REPO] [--self-test]" >&2; exit 2 ;;
  esac
done
[[ -n $SOURCE ]] || SOURCE=$(dirname "$B")
[[ -d $SOURCE/tests/golden/fixtures ]] || { echo "run.sh: no repository at $SOURCE (give --source)" >&2; exit 2; }
SOURCE=$(cd "$SOURCE" && pwd)
[[ -n $OUT ]] || OUT=$(mktemp -d /tmp/olmo2-gpu-check-XXXXXX)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
START=$(date +%s)
DEADLINE=$((START + 360))  # the whole check: 6 minutes
declare -a STEPS=() FIGURES=() SUMMARY=()
FAILED=0
say() { echo "== $*"; SUMMARY+=("$*"); }
json_string() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/ }; printf '"%s"' "$s"; }

# ---- what this machine has ----------------------------------------------------------------
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CUDA_LIB=""
for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib"; do
  [[ -e $d/libcudart.so.13 && -e $d/libcublasLt.so.13 ]] && { CUDA_LIB=$d; break; }
done
[[ -n $CUDA_LIB ]] || { echo "run.sh: no CUDA 13 toolkit libraries (libcudart.so.13, libcublasLt.so.13) under $CUDA_HOME" >&2; exit 1; }
NCCL_LIB=""
if [[ -e $CUDA_LIB/libnccl.so.2 ]]; then
  NCCL_LIB=$CUDA_LIB
elif command -v python3 >/dev/null; then
  NCCL_LIB=$(python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))' 2>/dev/null || true)
  [[ -e $NCCL_LIB/libnccl.so.2 ]] || NCCL_LIB=""
fi
[[ -n $NCCL_LIB ]] || { echo "run.sh: no NCCL (libnccl.so.2 in $CUDA_LIB or the nvidia-nccl wheel)" >&2; exit 1; }
export LD_LIBRARY_PATH=$B/lib:$NCCL_LIB:$CUDA_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OPAL_PREFIX=$B/ompi PMIX_INSTALL_PREFIX=$B/pmix PATH=$B/ompi/bin:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_vader_single_copy_mechanism=none
# One node: mpirun starts the ranks itself (no ssh on a bare machine to launch remote daemons).
export OMPI_MCA_plm=isolated
export OLMO2_TEST_SOURCE_DIR=$SOURCE OLMO2_TEST_BINARY=$B/bin/olmo2 OLMO2_TEST_MPIEXEC=$B/ompi/bin/mpirun
MPIRUN="$B/ompi/bin/mpirun --bind-to none"
GPU="none"
if (( SELF )); then
  export OLMO2_DEVICE_EMULATION=1
  GPU="none: the emulated device (self-test)"
elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1)
else
  echo "run.sh: no NVIDIA GPU here (nvidia-smi -L fails); run.sh --self-test checks the bundle without one" >&2
  exit 1
fi
say "GPU: $GPU; cudart and cuBLASLt from $CUDA_LIB; NCCL from $NCCL_LIB; bundle $B; tree $SOURCE; logs in $OUT"

# ---- steps --------------------------------------------------------------------------------
# True when the gtest log holds a skip whose reason is not a missing piece of hardware
# (those say "(not on this machine)": a second GPU, a GPU per rank).
bad_skips() {
  sed 's/\x1b\[[0-9;]*m//g' "$1" | awk '/: Skipped$/ { getline why; if (why !~ /not on this machine/) bad = 1 } END { exit !bad }'
}

# step NAME LIMIT_S COMMAND...: runs under `timeout` within what is left of the deadline;
# passed, failed, skipped (a test skipped on a GPU machine counts as failed), cut
# (past its limit) or not run (no time left).
step() {
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE - $(date +%s) - 5))
  local log=$OUT/$name.log outcome seconds t0
  if (( left < 5 )); then
    STEPS+=("{\"name\":$(json_string "$name"),\"outcome\":\"not run\",\"seconds\":0,\"log\":null}")
    say "$name: not run (the check's 6 minutes are used up)"; FAILED=1; return
  fi
  (( limit > left )) && limit=$left
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$log" 2>&1
  local rc=$?
  seconds=$(($(date +%s) - t0))
  if (( rc == 124 || rc == 137 )); then
    outcome=cut
  elif (( rc != 0 )); then
    outcome=failed
  elif (( ! SELF )) && { grep -q '\[mpi\] every test skipped' "$log" || bad_skips "$log"; }; then
    outcome=skipped
  else
    outcome=passed
  fi
  [[ $outcome == passed ]] || FAILED=1
  local counts
  counts=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]' "$log" | sed 's/\x1b\[[0-9;]*m//g' | tr -s ' ' | tr '\n' ';' | head -c 200)
  STEPS+=("{\"name\":$(json_string "$name"),\"outcome\":\"$outcome\",\"seconds\":$seconds,\"log\":$(json_string "$log"),\"tests\":$(json_string "$counts")}")
  say "$name: $outcome in ${seconds}s${counts:+ ($counts)}"
  if [[ $outcome != passed ]]; then grep -E 'Failure|FAILED|error|Error' "$log" | head -5 | sed 's/^/     /'; fi
}
figure() { FIGURES+=("{\"name\":$(json_string "$1"),\"value\":$2,\"unit\":$(json_string "$3")}"); say "figure: $1 = $2 $3"; }

if (( SELF )); then
  # Every ELF resolves every library here but the driver's.
  missing=""
  for e in "$B"/bin/* "$B"/ompi/bin/orterun "$B"/ompi/bin/orted "$B"/lib/*.so* "$B"/ompi/lib/*/openmpi/lib/openmpi3/*.so; do
    m=$(ldd "$e" 2>/dev/null | grep 'not found' | grep -v 'libcuda\.so' || true)
    [[ -n $m ]] && missing+="$(basename "$e"): $m; "
  done
  step ldd 30 bash -c "[[ -z '$missing' ]] || { echo 'unresolved: $missing'; exit 1; }"
  step mpirun 30 $MPIRUN -np 2 "$B/bin/olmo2" --help
  step train_gpu_emulated 120 "$B/bin/train_gpu_test" --gtest_color=no
  # The self-test proves the bundle's binaries run in a bare root; their whole suites run
  # in ctest outside it, so here the slower layout cases are sampled (GQA; the serve and
  # trace layouts left to ctest's launcher_device_emulation_test).
  step train_gpu_layouts_emulated 120 $MPIRUN -np 2 "$B/bin/train_gpu_layouts_test" --gtest_color=no --gtest_filter='*GQA*'
  step serve_engine_emulated 120 "$B/bin/serve_engine_test" --gtest_color=no --gtest_filter='*OnTheDevice*'
  step serve_engine_sliding_emulated 60 "$B/bin/serve_engine_sliding_test" --gtest_color=no --gtest_filter='*OnTheDevice*'
  step kv_cache_copy_emulated 60 "$B/bin/model_kv_cache_copy_test" --gtest_color=no --gtest_filter='*OnTheDevice*'
  step token_selection_emulated 60 "$B/bin/generation_token_selection_device_test" --gtest_color=no
  step device_emulation_cli 180 "$B/bin/launcher_device_emulation_test" --gtest_color=no \
    --gtest_filter='-TpAndPp/EmulatedLayouts.Serve*:TpAndPp/EmulatedLayouts.Trace*:TpAndPp/EmulatedLayouts.Generate*/pp2'
  # olmo2 itself: train --device cuda at tp 2 under this mpirun, and generate, against the CPU.
  W=$OUT/work; mkdir -p "$W"
  cfg=$SOURCE/tests/golden/fixtures/gqa-f32 trained=$SOURCE/tests/golden/fixtures/trained
  train_args="train --model-config '$trained/config.json' --data '$trained/tokens.npy' --seq-len 16 --global-batch 4 \
    --steps 3 --tp 2 --threads 1 --log-format json"
  step train_tp2_cuda 120 bash -c "
    set -e
    $MPIRUN -np 2 '$B/bin/olmo2' $train_args --device cuda --share-gpu > '$W/cuda.json'
    $MPIRUN -np 2 '$B/bin/olmo2' $train_args > '$W/cpu.json'
    grep -o '\"loss\":[^,]*' '$W/cuda.json' > '$W/cuda.loss'; grep -o '\"loss\":[^,]*' '$W/cpu.json' > '$W/cpu.loss'
    test -s '$W/cpu.loss' && cmp '$W/cuda.loss' '$W/cpu.loss' && cat '$W/cuda.loss'"
  step generate_cuda 60 bash -c "
    set -e
    '$B/bin/olmo2' generate --model '$cfg' --prompt-ids 1,2,3 --max-tokens 8 --format json --device cuda > '$W/gen_cuda.json'
    '$B/bin/olmo2' generate --model '$cfg' --prompt-ids 1,2,3 --max-tokens 8 --format json > '$W/gen_cpu.json'
    cmp '$W/gen_cuda.json' '$W/gen_cpu.json' && cat '$W/gen_cuda.json'"
else
  step ops 90 "$B/bin/ops_cuda_backend_test" --gtest_color=no --gtest_output="json:$OUT/ops.json" \
    --gtest_filter=-CudaProducts.BatchInvariantForEveryBatchSizeOfThe1BModel
  step ops_runtime 60 "$B/bin/ops_cuda_test" --gtest_color=no
  # The op table's backend test (tests/ops/backend_ops/): every op against the CPU op, then
  # the batch-invariant products on the fixed-order kernel.
  step backend_ops 60 "$B/bin/ops_backend_ops_test" --gtest_color=no
  step backend_ops_kernel 30 env OLMO2_CUDA_BATCH_INVARIANT=kernel "$B/bin/ops_backend_ops_test" --gtest_color=no \
    --gtest_filter='Table/BackendOp.MatchesTheCpu/linear_batch_invariant'
  step golden 90 "$B/bin/golden_cuda_test" --gtest_color=no
  # Batch invariance for every batch size 1 … 4,096 of the 1B model's shapes: the
  # pinned cuBLASLt algorithms (or the fallback where none can be pinned), then the
  # fixed-order kernel everywhere (OLMO2_CUDA_BATCH_INVARIANT=kernel).
  step batch_invariance 60 "$B/bin/ops_cuda_backend_test" --gtest_color=no \
    --gtest_filter=CudaProducts.BatchInvariantForEveryBatchSizeOfThe1BModel
  step batch_invariance_kernel 60 env OLMO2_CUDA_BATCH_INVARIANT=kernel "$B/bin/ops_cuda_backend_test" \
    --gtest_color=no --gtest_filter=CudaProducts.BatchInvariantForEveryBatchSizeOfThe1BModel
  step train 120 "$B/bin/train_gpu_test" --gtest_color=no
  step train_layouts 90 $MPIRUN -np 2 "$B/bin/train_gpu_layouts_test" --gtest_color=no
  # olmo2 train --device cuda at tp 2 × pp 2 on 4 ranks (NCCL with 4 GPUs, else --share-gpu).
  step train_tp2_pp2 120 "$B/bin/launcher_train_cuda_test" --gtest_color=no
  step serve 120 "$B/bin/launcher_serve_cuda_test" --gtest_color=no
  step serve_engine 60 "$B/bin/serve_engine_test" --gtest_color=no --gtest_filter='*OnTheDevice*'
  step serve_engine_sliding 60 "$B/bin/serve_engine_sliding_test" --gtest_color=no --gtest_filter='*OnTheDevice*'
  step kv_cache_copy 30 "$B/bin/model_kv_cache_copy_test" --gtest_color=no --gtest_filter='*OnTheDevice*'
  step token_selection 30 "$B/bin/generation_token_selection_device_test" --gtest_color=no
  step nccl_np1 45 $MPIRUN -np 1 "$B/bin/parallel_device_communicator_mpi_test" --gtest_color=no
  step host_staged_np2 45 $MPIRUN -np 2 "$B/bin/parallel_device_communicator_mpi_test" --gtest_color=no
  step host_staged_np4 60 $MPIRUN -np 4 "$B/bin/parallel_device_communicator_mpi_test" --gtest_color=no
  # Benchmarks: figures, measured against the machine's own peaks from the same run.
  step peaks 45 "$B/bin/olmo2_gpu_peaks"
  PEAK=$(grep -o '"figure":"bf16_peak_tflops","value":[0-9.]*' "$OUT/peaks.log" | grep -o '[0-9.]*$' || true)
  BW=$(grep -o '"figure":"copy_read_gbps","value":[0-9.]*' "$OUT/peaks.log" | grep -o '[0-9.]*$' || true)
  [[ -n $PEAK ]] && figure "cuBLASLt bf16 product peak" "$PEAK" "TFLOP/s"
  [[ -n $BW ]] && figure "device copy bandwidth (read)" "$BW" "GB/s"
  step benchmarks 150 env GPU_BENCH_DIR="$OUT/bench" GPU_BENCH_SOURCE="$SOURCE" "$B/gpu_bench.sh" "$B" "${PEAK:-0}" "${BW:-0}"
  while IFS= read -r line; do
    FIGURES+=("{\"name\":$(json_string "${line#figure: }"),\"value\":null,\"unit\":\"text\"}")
    SUMMARY+=("$line")
  done < <(grep '^figure: ' "$OUT/benchmarks.log" 2>/dev/null || true)
fi

# ---- results ------------------------------------------------------------------------------
TOTAL=$(($(date +%s) - START))
{
  printf '{"mode":"%s","gpu":%s,"seconds":%d,"passed":%s,\n"steps":[\n' "$( ((SELF)) && echo self-test || echo gpu)" \
    "$(json_string "$GPU")" "$TOTAL" "$( ((FAILED)) && echo false || echo true)"
  (IFS=$',\n'; printf '%s\n' "${STEPS[*]}")
  printf '],\n"figures":[\n'
  (IFS=$',\n'; [[ ${#FIGURES[@]} -gt 0 ]] && printf '%s\n' "${FIGURES[*]}")
  printf ']}\n'
} >"$OUT/results.json"
echo
echo "==== olmo2 GPU check: $( ((FAILED)) && echo FAILED || echo passed) in ${TOTAL}s (results.json and logs in $OUT) ===="
printf '  %s\n' "${SUMMARY[@]}"
exit $FAILED
