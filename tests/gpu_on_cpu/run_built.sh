#!/usr/bin/env bash
# run_built.sh DIR BINARY [--mpirun MPIRUN WORDS...] GTEST_ARGS...: runs DIR/BINARY
# GTEST_ARGS (a test of the OLMO2_CUDA_ON_CPU build), under MPIRUN WORDS when given (they
# end at the first --gtest argument), or exits 77 (skipped) saying how to make it when it
# is not built.
set -euo pipefail
dir=$1 bin=$2
shift 2
launcher=()
if [[ ${1:-} == --mpirun ]]; then
  shift
  while [[ $# -gt 0 && $1 != --gtest* ]]; do launcher+=("$1"); shift; done
fi
if [[ ! -x $dir/$bin ]]; then
  echo "not built: $dir/$bin (scripts/setup.sh builds the OLMO2_CUDA_ON_CPU folder build-cuda-on-cpu/)"
  exit 77
fi
exec "${launcher[@]}" "$dir/$bin" "$@"
