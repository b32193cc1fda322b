#!/usr/bin/env bash
# backend_ops.sh DIR SOURCE_DIR: the op table's backend test (tests/ops/backend_ops/) on the
# SIMT executor — every op, then the batch-invariant products again on the fixed-order
# kernel (OLMO2_CUDA_BATCH_INVARIANT=kernel) — with the executor counting its launches,
# then launch_sites.py: every OLMO2_LAUNCH site of ops/cuda/ must have run against the CPU
# op. DIR is the OLMO2_CUDA_ON_CPU build's tests/ folder; exits 77 (skipped) when the test
# is not built there.
set -euo pipefail
dir=$1 source=$2
bin=$dir/ops/ops_backend_ops_test
if [[ ! -x $bin ]]; then
  echo "not built: $bin (scripts/setup.sh builds the OLMO2_CUDA_ON_CPU folder build-cuda-on-cpu/)"
  exit 77
fi
# The executor, never the emulated device (under which Device::CUDA runs the CPU ops and
# no kernel would launch).
unset OLMO2_DEVICE_EMULATION
counts=$(mktemp -u /tmp/olmo2-launches.XXXXXX)
trap 'rm -f "$counts"' EXIT
OLMO2_SIMT_STATS=$counts "$bin"
OLMO2_SIMT_STATS=$counts OLMO2_CUDA_BATCH_INVARIANT=kernel "$bin" \
  --gtest_filter='Table/BackendOp.MatchesTheCpu/linear_batch_invariant'
python3 "$source/tests/gpu_on_cpu/launch_sites.py" "$source" "$counts"
