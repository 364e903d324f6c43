#!/usr/bin/env bash
# setup.sh — install what building and testing sdpa needs on Debian 12 (run as root).
# Skips apt entirely when everything is already installed.
set -euo pipefail
packages=(build-essential cmake ninja-build git pkg-config
          libgtest-dev libgmock-dev libbenchmark-dev libfmt-dev libcli11-dev nlohmann-json3-dev
          libomp-dev clang libclang-rt-14-dev
          libopenblas-dev   # the BLAS baseline of `sdpa bench`
          openmpi-bin libopenmpi-dev    # ring attention over MPI (src/dist, `sdpa attention --ring`)
          python3 python3-matplotlib    # Debian's python3 draws the lab report's plots
          python3-venv python3-dev)     # the Python package's venv and build (scripts/python_test.sh)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages (${missing[*]}); run as root or with sudo to install them" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
echo "setup: done"
