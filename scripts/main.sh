#!/usr/bin/env bash
# main.sh — set everything up on a fresh Debian 12 machine and run the main job:
#   1. sdpa check: attention forward and backward on generated inputs, timed, checked
#      against the fp64 reference;
#   2. sdpa lab report: every claim of the seed documents measured, written to
#      report/index.html (one self-contained page) and report/lab.json.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
./build/apps/sdpa/sdpa check
./build/apps/sdpa/sdpa lab report --out report "$@"
echo "open report/index.html"
