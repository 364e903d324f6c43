#!/usr/bin/env bash
# main.sh — set everything up on a fresh Debian 12 machine and run the main job:
#   1. sdpa check: attention forward and backward on generated inputs, timed, checked
#      against the fp64 reference;
#   2. sdpa lab report: every claim of the seed documents measured, written to
#      report/index.html (one self-contained page) and report/lab.json;
#   3. sdpa train with its defaults: a small transformer learns mqar (associative recall)
#      from scratch in under a minute; its log goes to report/train_mqar.jsonl;
#   4. sdpa sweep, reduced (one seed, one head size: 8 runs, under a minute): every temperature
#      policy trained on sort, written to report/sweep/index.html. The full grid of
#      docs/training.md (3 seeds, d_k 8 and 32, ~3 minutes): sdpa sweep --out DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
./build/bin/sdpa check
./build/bin/sdpa lab report --out report "$@"
./build/bin/sdpa train > report/train_mqar.jsonl
tail -n 1 report/train_mqar.jsonl
./build/bin/sdpa sweep --seeds 1 --d-head 16 --out report/sweep
echo "open report/index.html and report/sweep/index.html"
