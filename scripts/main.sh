#!/usr/bin/env bash
# main.sh — set everything up on a fresh Debian 12 machine and run the main job:
# attention forward and backward on generated inputs, timed, checked against the fp64 reference.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
./build/apps/sdpa/sdpa check "$@"
