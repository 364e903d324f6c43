#!/usr/bin/env bash
# build.sh DIR [cmake args...] — configure (Ninja) and build into DIR.
# SDPA_JOBS sets the parallel jobs (default: all cores), e.g. SDPA_JOBS=1 on a shared machine.
set -euo pipefail
dir=$1; shift
mkdir -p "$dir"
cmake -S "$(dirname "$0")/.." -B "$dir" -G Ninja "$@" > "$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
cmake --build "$dir" -j "${SDPA_JOBS:-$(nproc)}"
