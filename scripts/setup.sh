#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for olmo2: installs every system dependency from
# Debian's packages (one apt-get line), then configures and builds in Release.
# Re-running is cheap: apt is skipped when every package is already installed.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(cmake g++ make pkg-config
  openmpi-bin libopenmpi-dev libopenblas-dev
  libboost-program-options-dev prometheus-cpp-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev)

missing=$(dpkg-query -W -f='${db:Status-Abbrev} ${binary:Package}\n' "${PACKAGES[@]}" 2>&1 | grep -vc '^ii ' || true)
if [ "$missing" != "0" ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
